"""Model adapters (one wire protocol each) and the wrappers composed around them (DESIGN.md §6)."""
