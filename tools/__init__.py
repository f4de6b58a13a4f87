"""Build-time tools of the homespec repository. Not part of the installed package: the runtime only
reads what they write (e.g. homespec/data/prompts/)."""
