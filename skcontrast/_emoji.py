"""Text that ships with a package: the ``emoji`` package's multilingual names as
cross-lingual pairs (:func:`load_emoji_names`), and typos of texts (:func:`add_typos`).
Exported by :mod:`skcontrast.datasets`."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._validation import check_choice, check_int, describe

EMOJI_LANGUAGES = ("en", "es", "ja", "ko", "pt", "it", "fr", "de", "fa", "id", "zh", "ru",
                   "tr", "ar")
#: English and the Latin-script languages of the ``emoji`` package: same-script pairs,
#: where names share spellings (cognates, loanwords, proper names) with English
SAME_SCRIPT_LANGUAGES = ("en", "es", "pt", "it", "fr", "de", "id", "tr")
#: English against a Latin, a Cyrillic and a CJK script: mostly nothing to match letters on
CROSS_SCRIPT_LANGUAGES = ("en", "de", "ru", "ja")


def load_emoji_names(languages: Any = ("en", "de", "ru", "ja"), *, anchor: str = "en",
                     test_size: float = 0.2, random_state: Any = 0) -> Any:
    """Names of the Unicode emoji in 14 languages, as cross-lingual text pairs (no
    download: the names ship with the ``emoji`` package, ``pip install emoji``).

    Every fully qualified emoji (and skin-tone and hair components), about 4,000, is a
    *concept* with one name per language, e.g. ``'thumbs up medium skin tone'``,
    ``'daumen hoch mittlere hautfarbe'``, ``'большой палец вверх средний тон кожи'``,
    ``'サムズアップ 中間の肌色'`` (the package's ``:snake_case:`` codes with the colons
    dropped and underscores as spaces). A pair is an ``anchor``-language name and the
    same emoji's name in another language; the split is **by emoji**, so no test
    concept is seen in training. Skin-tone, gender, hair and flag variants differ by a
    word or two: the natural hard negatives, and, where two emoji share a name in a
    language, false negatives (same text, other group).

    Parameters
    ----------
    languages : sequence of str, default=('en', 'de', 'ru', 'ja')
        Languages to load, among ``'en', 'es', 'ja', 'ko', 'pt', 'it', 'fr', 'de',
        'fa', 'id', 'zh', 'ru', 'tr', 'ar'``; must include ``anchor``.
    anchor : str, default='en'
        The language of the first text of every pair (the query side).
    test_size : float, default=0.2
        Share of the emoji held out for testing, in (0, 1).
    random_state : int, numpy Generator or None, default=0
        Draws the split.

    Returns
    -------
    data : sklearn.utils.Bunch
        ``names`` (dict: language -> object array of one name per emoji),
        ``emoji`` (the emoji themselves), ``train_emoji`` and ``test_emoji`` (indices
        of the emoji of each part), ``pairs_train``/``pairs_test`` (object arrays of
        shape ``(m, 2)``: anchor name, other name), ``groups_train``/``groups_test``
        (the emoji of each pair: pairs of one emoji share a group) and
        ``languages_train``/``languages_test`` (the other language of each pair).

    Examples
    --------
    >>> from skcontrast.datasets import load_emoji_names
    >>> data = load_emoji_names(["en", "de"])  # doctest: +SKIP
    >>> data.pairs_train[0]  # doctest: +SKIP
    array(['...', '...'], dtype=object)
    """
    from sklearn.utils import Bunch

    try:
        import emoji
    except ImportError as exc:
        raise ImportError("load_emoji_names needs the emoji package: pip install emoji "
                          "(or pip install 'skcontrast[text]')") from exc
    if isinstance(languages, str):
        languages = [languages]
    languages = [check_choice(lang, "languages", EMOJI_LANGUAGES) for lang in languages]
    if len(set(languages)) != len(languages):
        raise ValueError(f"languages must not repeat; got {languages}")
    check_choice(anchor, "anchor", EMOJI_LANGUAGES)
    if anchor not in languages or len(languages) < 2:
        raise ValueError(f"languages must hold the anchor {anchor!r} and at least one other "
                         f"language; got {languages}")
    if not (isinstance(test_size, float | int) and 0 < float(test_size) < 1):
        raise ValueError(f"test_size must be a share in (0, 1); got {describe(test_size)}")
    table = _emoji_table(emoji, languages)
    kept = [e for e, row in table.items() if all(row.get(lang) for lang in languages)]
    names = {lang: np.array([_emoji_text(table[e][lang]) for e in kept], dtype=object)
             for lang in languages}
    rng = np.random.default_rng(random_state)
    order = rng.permutation(len(kept))
    n_test = max(1, round(float(test_size) * len(kept)))
    test, train = np.sort(order[:n_test]), np.sort(order[n_test:])
    others = [lang for lang in languages if lang != anchor]

    def pairs(emoji_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        rows = np.concatenate([emoji_rows] * len(others))
        other = np.repeat(others, len(emoji_rows))
        texts = np.empty((len(rows), 2), dtype=object)
        texts[:, 0] = names[anchor][rows]
        texts[:, 1] = [names[lang][r] for lang, r in zip(other, rows, strict=True)]
        return texts, rows, other.astype(object)

    train_pairs, train_groups, train_langs = pairs(train)
    test_pairs, test_groups, test_langs = pairs(test)
    return Bunch(names=names, emoji=np.array(kept, dtype=object), train_emoji=train,
                 test_emoji=test, pairs_train=train_pairs, pairs_test=test_pairs,
                 groups_train=train_groups, groups_test=test_groups,
                 languages_train=train_langs, languages_test=test_langs, anchor=anchor)


def add_typos(texts: Any, n_edits: int = 2, *, random_state: Any = 0) -> np.ndarray:
    """Each text with ``n_edits`` random character edits (a deletion, an insertion or a
    substitution of a lowercase letter, each equally likely), as a user mistypes a query:
    data on which lexical search of character n-grams is strong.

    Parameters
    ----------
    texts : sequence of str
    n_edits : int, default=2
    random_state : int, numpy Generator or None, default=0

    Returns
    -------
    ndarray of object, shape (n,)

    Examples
    --------
    >>> from skcontrast.datasets import add_typos
    >>> add_typos(["thumbs up", "red heart"], random_state=0).shape
    (2,)
    """
    check_int(n_edits, "n_edits", minimum=0)
    rng = np.random.default_rng(random_state)
    letters = "abcdefghijklmnopqrstuvwxyz"
    out = []
    for text in texts:
        if not isinstance(text, str):
            raise ValueError(f"texts must be strings; got {describe(text)}")
        chars = list(text)
        for _ in range(int(n_edits)):
            i, kind = int(rng.integers(max(1, len(chars)))), int(rng.integers(3))
            if kind == 0 and len(chars) > 1:
                del chars[i]
            elif kind == 1 or not chars:
                chars.insert(i, letters[rng.integers(26)])
            else:
                chars[i] = letters[rng.integers(26)]
        out.append("".join(chars))
    return np.array(out, dtype=object)


def _emoji_table(emoji: Any, languages: list[str]) -> dict[str, dict[str, str]]:
    """emoji -> {language: code} for fully qualified emoji and components, from the
    package's table (with the languages loaded, as ``emoji.config.load_language`` does)."""
    # the package loads a language into its table on demand (once: it remembers)
    emoji.config.load_language([lang for lang in languages if lang != "en"])
    table = emoji.EMOJI_DATA
    keep = {emoji.STATUS["fully_qualified"], emoji.STATUS["component"]}
    return {e: {k: v for k, v in row.items() if k in languages}
            for e, row in table.items() if row.get("status") in keep}


def _emoji_text(code: str) -> str:
    """``':thumbs_up_medium_skin_tone:'`` -> ``'thumbs up medium skin tone'``."""
    return code.strip(":").replace("_", " ").strip()
