"""Method declarations by service area; ``hermesd.protocol`` imports every module here."""
