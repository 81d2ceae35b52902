"""The public redaction corpus generated from gitleaks' rule tests (see corpus.py)."""
