"""The user guide: every Python code block runs on its own and Sphinx builds it without
warnings."""

import pytest
from _helpers import code_blocks, docs_build_available

pytestmark = pytest.mark.slow  # the user guide's code, run in a subprocess

BLOCKS = code_blocks()


@pytest.mark.parametrize("name", list(BLOCKS))
def test_doc_code_block_runs_on_its_own(name, user_facing):
    outcome = user_facing["blocks"][name]
    assert outcome == "", f"{BLOCKS[name]}\n---\n{outcome[-3000:]}"


@pytest.mark.skipif(not docs_build_available(),
                    reason="the docs build needs the 'docs' extra (sphinx, numpydoc)")
def test_docs_build_without_warnings(user_facing):
    """Nitpicky (-n): every cross-reference resolves, those into scikit-learn, torch and
    skorch through the local inventories of docs/_intersphinx, with no network; and the
    built pages link into those projects' documentation."""
    built = user_facing["docs"]
    assert built["status"] == 0, built["output"][-3000:]
    pages = built["page"]
    assert "https://scikit-learn.org/stable/modules/generated/sklearn.base.clone.html" in pages
