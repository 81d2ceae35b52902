"""The fact engine: the values a text states (numbers, money, dates, identifiers, ref_ids, in digits or
words, Chinese forms included), what they are about, and which of them a session knows.

A room of its own: it imports nothing else of context_svc and nothing of agentmesh (import-linter
contract `facts-alone`), so it can be read, tested (tests/unit/context/facts/) and reused by itself.
Modules import downwards only (contract `facts-layers`):

    known     the "Known facts" lines of the system block: public records, most important first
    entities  one record per key with its provenance (rejected, corrected, who said it)
    lines     the user's lines that state a value or a constraint, most important first
    facts     the fact extractor and its normal forms; the checks a summary must pass
    labels    the label a value is read under ("order amount", "refund cap"), from its words
    numbers   numbers, amounts and dates in words (English, Chinese) read into normal values
"""
