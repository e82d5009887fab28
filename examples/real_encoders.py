"""Real encoders, built from scratch (no weights can be downloaded): a CLIP-style model
with a HuggingFace transformers text encoder and a locally trained tokenizer, scored by
zero-shot classification; and a timm image model, where timm can be installed.

1. Image-text. Each of scikit-learn's digit images gets a caption, "a photo of the digit
   seven" with three random words around it. A WordLevel tokenizer is trained on the
   training captions with the ``tokenizers`` library; the text encoder is a 2-layer
   ``transformers`` BERT built from a small config (random weights), mean-pooled over the
   attention mask; the image encoder is skcontrast's small CNN. The text view is
   ``{"input_ids": ..., "attention_mask": ...}``: a view of several tensors, handed to the
   encoder as keyword arguments. Trained with CLIP's symmetric InfoNCE and a learned
   temperature, then:
   - zero-shot classification: each test image takes the digit of the nearest of the ten
     prompts "a photo of the digit <name>";
   - recall@1 of each test image's own caption among the test captions.
2. timm (only where timm and a torchvision matching torch are installed: there is no
   CPU torchvision on this project's package index): a randomly initialised
   ``resnet10t`` trained SimCLR-style on the same images, scored by kNN accuracy.

    python examples/real_encoders.py [--quick] [--out DIR]   (needs transformers, tokenizers)
"""

import argparse
import functools
import importlib.util
from pathlib import Path

import numpy as np
import torch
from sklearn.model_selection import train_test_split
from torch import nn

from skcontrast import ContrastiveEmbedder
from skcontrast.datasets import digit_cnn, load_digit_images
from skcontrast.losses import SymmetricInfoNCE
from skcontrast.metrics import knn_accuracy, recall_at_k

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--quick", action="store_true")
parser.add_argument("--out", default="examples/output")
args = parser.parse_args()
out = Path(args.out)
out.mkdir(parents=True, exist_ok=True)
# quick: a smoke run of every score on a few images in small batches
epochs, batch_size = (2, 32) if args.quick else (40, 128)
device = "cuda" if torch.cuda.is_available() else "cpu"

NAMES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
FILLER = ["small", "old", "scan", "grey", "neat", "bold", "quick", "sharp", "faint", "dark",
          "ink", "pen", "note", "page", "mark", "line"]
images, y = load_digit_images()
rng = np.random.default_rng(0)
captions = [" ".join(rng.permutation(["a photo of the digit " + NAMES[label],
                                      *rng.choice(FILLER, 3)])) for label in y]
train, test = train_test_split(np.arange(len(y)), test_size=0.3, random_state=0, stratify=y)
if args.quick:
    train, test = train[:64], test[:32]


def make_tokenizer(texts):
    """A word-level tokenizer trained here, on the training captions only."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.train_from_iterator(texts, trainers.WordLevelTrainer(
        special_tokens=["[PAD]", "[UNK]"]))
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]", length=16)
    tokenizer.enable_truncation(16)
    return tokenizer


def encode(tokenizer, texts):
    batch = tokenizer.encode_batch(texts)
    return {"input_ids": np.array([e.ids for e in batch], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in batch], dtype=np.int64)}


class TextEncoder(nn.Module):
    """A small BERT from a config (random weights), mean-pooled over real tokens."""

    def __init__(self, vocab_size, n_out):
        super().__init__()
        from transformers import BertConfig, BertModel

        config = BertConfig(vocab_size=vocab_size, hidden_size=64, num_hidden_layers=2,
                            num_attention_heads=2, intermediate_size=128,
                            max_position_embeddings=16)
        self.bert = BertModel(config)
        self.project = nn.Linear(64, n_out)

    def forward(self, input_ids, attention_mask):
        hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        mask = attention_mask[..., None].to(hidden.dtype)
        return self.project((hidden * mask).sum(1) / mask.sum(1).clamp_min(1))


tokenizer = make_tokenizer([captions[i] for i in train])
tokens = encode(tokenizer, captions)
X = {"image": images, "text": tokens}
k = 32
clip = ContrastiveEmbedder(
    module={"image": functools.partial(digit_cnn, norm="group"),
            "text": TextEncoder(tokenizer.get_vocab_size(), k)},
    n_components=k, loss=SymmetricInfoNCE(0.07, learn_temperature=True), lr=1e-3,
    batch_size=batch_size,
    max_epochs=epochs, random_state=0, device=device)
subset = {"image": images[train], "text": {key: v[train] for key, v in tokens.items()}}
clip.fit(subset)
image_test = clip.transform_view(images[test], view="image")
prompts = encode(tokenizer, [f"a photo of the digit {name}" for name in NAMES])
classes = clip.transform_view(prompts, view="text")
zero_shot = float(np.mean((image_test @ classes.T).argmax(1) == y[test]))
caption_test = clip.transform_view({key: v[test] for key, v in tokens.items()}, view="text")
lines = [f"{len(train)} training images with captions, {len(test)} test; {epochs} epochs, "
         f"device {device}",
         f"learned temperature: {clip.temperature_:.3f}",
         f"zero-shot accuracy by the nearest of ten prompts: {zero_shot:.3f} (chance 0.100)",
         f"image -> own caption recall@1: {recall_at_k(image_test, caption_test, 1, 'u2v'):.3f}"
         f" (chance {1 / len(test):.4f}; captions of a digit differ only by random words)"]

if importlib.util.find_spec("timm") is not None and \
        importlib.util.find_spec("torchvision") is not None:
    import timm

    from skcontrast.datasets import GaussianNoise

    def resnet(n_in, n_out):
        body = timm.create_model("resnet10t", pretrained=False, in_chans=1, num_classes=0)
        return nn.Sequential(body, nn.Linear(body.num_features, n_out))

    simclr = ContrastiveEmbedder(module=resnet, augmentation=GaussianNoise(0.1),
                                 batch_size=batch_size, max_epochs=epochs, random_state=0,
                                 device=device).fit(images[train])
    knn = knn_accuracy(simclr.transform(images[train]), y[train],
                       simclr.transform(images[test]), y[test])
    lines.append(f"timm resnet10t (random init), SimCLR, kNN accuracy: {knn:.3f}")
else:
    lines.append("timm part skipped: needs timm and a torchvision that matches torch "
                 "(for a CPU torch: pip install torchvision --index-url "
                 "https://download.pytorch.org/whl/cpu)")
text = "\n".join(lines)
print(text)
(out / "real_encoders.txt").write_text(text + "\n")
