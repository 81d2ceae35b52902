"""Model adapters (one wire protocol each) and the wrappers composed around them (docs/design.md §6)."""
