"""The OpenAI- and Anthropic-compatible HTTP APIs of provider_svc (docs/design.md §6)."""
