"""Approvals owned by the daemon: commands parsed (`shell`) and unwrapped (`commands`), the
dangerous-command table and the floor (`patterns`), what the approver is shown (`display`), the
decisions and pending approvals (`broker.ApprovalBroker`) and their RPC methods
(`service.ApprovalService`)."""
