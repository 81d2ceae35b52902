"""The OpenAI- and Anthropic-compatible HTTP APIs of provider_svc (docs/architecture.md §6)."""
