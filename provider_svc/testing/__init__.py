"""The offline (scripted) model's room: `scripted/` is the model, its policies and its fault injection;
`settings` is its one fault schema (`FaultConfig`), which the core configuration refers to for
`providers.backends[].models[].faults`.

Kept light on purpose: `agentmesh.config` imports `provider_svc.testing.settings`, so importing this package
must not load the scripted model (tiktoken, the policies).
"""
