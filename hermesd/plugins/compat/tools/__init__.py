"""hermesd's ``tools`` package: ``registry`` only."""
