"""Text: strings into token ids, a bag-of-n-grams encoder, hard-negative mining and
hybrid lexical + learned retrieval.

The estimators take strings directly (``ContrastiveEmbedder().fit(string_pairs)``): a
*tokenizer* turns each column of strings into a padded matrix of token ids, and a text
view's default encoder is :class:`NgramBagEncoder`, an embedding bag over those ids
(fastText's model, Joulin et al., 2017), so that text trains with no model download.
Any callable ``tokenizer(list_of_str) -> (n, L) int array`` works, and so does a Hugging
Face tokenizer (its ``input_ids``; the default encoder then bags its tokens, or give a
transformer as ``module``).

Its private modules are ``_tokenize`` (tokenizer and encoder), ``_search`` (chunked
top-k search), ``_mining`` (hard-negative mining) and ``_hybrid`` (hybrid retrieval);
the public names are the ones below.
"""

from ._hybrid import AUTO_WEIGHTS, LEXICAL, HybridRetriever
from ._mining import mine_hard_negatives
from ._search import top_k_search
from ._tokenize import ANALYZERS, HashingNgramTokenizer, NgramBagEncoder

# saved models and error messages name the classes by their public path
for _public in (HashingNgramTokenizer, NgramBagEncoder, HybridRetriever):
    _public.__module__ = __name__
del _public

__all__ = ["ANALYZERS", "AUTO_WEIGHTS", "LEXICAL", "HashingNgramTokenizer", "HybridRetriever",
           "NgramBagEncoder", "mine_hard_negatives", "top_k_search"]
