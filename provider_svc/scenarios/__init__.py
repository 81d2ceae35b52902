"""Scripted-model policies and scenario YAML files (see provider_svc/testing/scripted/ for the interface)."""
