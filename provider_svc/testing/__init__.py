"""The offline (scripted) model's room: `scripted/` is the model, its policies and its fault injection.

Its fault schema (`FaultConfig`) is `agentmesh.config.faults`: the configuration checks agentmesh.yaml at
load in every service, and the core never imports a service.
"""
