"""Scripted-model policies and scenario YAML files (see provider_svc/models/scripted/ for the interface)."""
