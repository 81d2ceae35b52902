"""One run of one task on this replica, as a small typed step machine (docs/design.md §7).

Modules import downwards only (import-linter contract `run-layers`):

    loop          drives the phases of a run, one span per step, until a phase returns an exit
    exits         does what an exit says: the terminal commit (succeed, fail, abort), parking
    phases        the phase functions (setup, think, act) and PHASES, the registry of phases
    tool_calls    one tool call: the loop guard, the policy applied to its outcome
    context       `Run`: the run's state and collaborators, what every phase receives
    checkpointer  fenced commits of the cursor and events       downstream  the other services
    decisions     pure decisions (guards, error classes, what follows a reply or an outcome)
    next_step     the NextStep union every phase returns
    state         the RunState value     names   ids of messages and calls     texts   event texts
"""
