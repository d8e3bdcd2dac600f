"""Tools the model can call: the registry and its call pipeline (`registry`), results
(`results`), visibility checks (`checks`) and the built-in tools (`builtin_files`,
`builtin_skills`)."""
