"""Adapters to other training libraries, each imported on its own (``from
skcontrast.integrations import sentence_transformers``) so that the core never needs
them."""
