"""Approvals owned by the daemon: the dangerous-command table (`patterns`), the decisions and
pending approvals (`broker.ApprovalBroker`) and their RPC methods (`service.ApprovalService`)."""
