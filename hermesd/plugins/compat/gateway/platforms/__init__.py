"""hermesd's ``gateway.platforms`` package: ``base``, the adapter interface."""
