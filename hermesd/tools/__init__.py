"""Tools the model can call: the registry and its call pipeline (`registry`), how a tool is
declared and checked (`schema`), results (`results`), visibility checks (`checks`), the skill
catalog the skills tools show (`skill_catalog`) and the built-in tools (`builtin_files`,
`builtin_skills`, `terminal`)."""
