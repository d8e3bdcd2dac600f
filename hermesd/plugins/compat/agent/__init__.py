"""hermesd's ``agent`` package: the ABCs plugins subclass and a few helpers."""
