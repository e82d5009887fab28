"""Two modalities, CLIP-style: digit images paired with token-id "captions", a CNN for the
images and an EmbeddingBag for the text, and cross-modal retrieval through transform_view.

Each 8x8 digit image (scikit-learn's bundled digits) gets a caption of 6 token ids: the
word of its label ("zero" ... "nine", ids 1-10) at a random position among 5 distractor
words (ids 11-60) that carry no information. ContrastiveEmbedder takes the two
modalities as a dict, {"image": float32 (n, 1, 8, 8), "text": int64 (n, 6)}, with one
encoder per view. After training, ``transform_view`` embeds one modality alone:

- zero-shot classification: each test image is labelled with the nearest of the ten
  one-word captions "zero" ... "nine" (as CLIP does with prompts);
- text -> image search: for each one-word query, the fraction of its 10 nearest test
  images that show that digit;
- pair retrieval: recall@1 of the exact caption of an image, and back (distractors make
  captions of the same digit differ, so this is the hard, instance-level task).

    python examples/two_modalities.py [--quick] [--out DIR]
"""

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import torch
from sklearn.model_selection import train_test_split
from torch import nn

from skcontrast import ContrastiveEmbedder
from skcontrast.datasets import digit_cnn, load_digit_images
from skcontrast.losses import SymmetricInfoNCE
from skcontrast.metrics import recall_at_k

WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
N_DISTRACTORS, LENGTH, PAD = 50, 6, 0
VOCABULARY = len(WORDS) + 1 + N_DISTRACTORS


class BagOfWords(nn.Module):
    """Text encoder: mean of word embeddings (padding ignored), then a linear map."""

    def __init__(self, vocabulary: int, n_out: int) -> None:
        super().__init__()
        self.bag = nn.EmbeddingBag(vocabulary, 64, mode="mean", padding_idx=PAD)
        self.head = nn.Sequential(nn.ReLU(), nn.Linear(64, n_out))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.bag(tokens))


def text_encoder(n_in: int, n_out: int) -> BagOfWords:
    """A module factory f(n_in, n_out): built inside fit, after seeding."""
    return BagOfWords(VOCABULARY, n_out)


def captions(labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Token ids: the label's word (id label + 1) among random distractors (11 ... 60)."""
    tokens = rng.integers(len(WORDS) + 1, len(WORDS) + 1 + N_DISTRACTORS,
                          size=(len(labels), LENGTH))
    tokens[np.arange(len(labels)), rng.integers(LENGTH, size=len(labels))] = labels + 1
    return tokens


def one_word_queries() -> np.ndarray:
    queries = np.full((len(WORDS), LENGTH), PAD)
    queries[:, 0] = np.arange(len(WORDS)) + 1
    return queries


parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--quick", action="store_true")
parser.add_argument("--out", default="examples/output")
args = parser.parse_args()
out = Path(args.out)
out.mkdir(parents=True, exist_ok=True)
# quick: a smoke run of every score and the figure on a few pairs in small batches
epochs, batch_size = (2, 32) if args.quick else (60, 128)

images, y = load_digit_images()
tokens = captions(y, np.random.default_rng(0))
i_train, i_test = train_test_split(np.arange(len(y)), test_size=0.3, random_state=0,
                                   stratify=y)
if args.quick:
    i_train, i_test = i_train[:64], i_test[:64]
X_train = {"image": images[i_train], "text": tokens[i_train]}
est = ContrastiveEmbedder(module={"image": digit_cnn, "text": text_encoder},
                          n_components=32, batch_size=batch_size, max_epochs=epochs,
                          loss=SymmetricInfoNCE(0.1), lr=3e-3, random_state=0).fit(X_train)

image_emb = est.transform_view(images[i_test], view="image")
text_emb = est.transform_view(tokens[i_test], view="text")
query_emb = est.transform_view(one_word_queries(), view="text")
zero_shot = float(np.mean((image_emb @ query_emb.T).argmax(1) == y[i_test]))
top = np.argsort(-(query_emb @ image_emb.T), axis=1)[:, :10]
precision_at_10 = float(np.mean(y[i_test][top] == np.arange(len(WORDS))[:, None]))
chance_pairs = 1 / len(i_test)
print(f"{len(i_train)} training pairs, {len(i_test)} test pairs, {epochs} epochs; "
      f"chance: zero-shot 0.100, pair recall@1 {chance_pairs:.4f}")
print(f"zero-shot image classification (nearest one-word caption): {zero_shot:.3f}")
print(f"text -> image search, precision@10 of the one-word queries: {precision_at_10:.3f}")
print(f"pair recall@1 image -> its caption: "
      f"{recall_at_k(image_emb, text_emb, direction='u2v'):.3f}, caption -> its image: "
      f"{recall_at_k(image_emb, text_emb, direction='v2u'):.3f}")

fig, axes = plt.subplots(len(WORDS), 6, figsize=(6, 10))
for word, (row, hits) in enumerate(zip(axes, top, strict=True)):
    row[0].text(0.5, 0.5, f'"{WORDS[word]}"', ha="center", va="center")
    for ax, index in zip(row[1:], hits, strict=False):
        ax.imshow(images[i_test][index, 0], cmap="gray_r")
    for ax in row:
        ax.axis("off")
fig.suptitle("text -> image: top 5 test images per one-word query")
fig.tight_layout()
fig.savefig(out / "two_modalities.png", dpi=100)
print(f"figure: {out / 'two_modalities.png'}")
