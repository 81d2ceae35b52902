"""Scripted-model policies and scenario YAML files (see provider_svc/models/scripted.py for the interface)."""
