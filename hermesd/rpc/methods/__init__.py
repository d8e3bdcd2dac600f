"""Method declarations by service area; `hermesd.rpc.protocol` imports every module here."""
