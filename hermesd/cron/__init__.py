"""Scheduled turns: jobs kept in the store, a scheduler that fires them into sessions, and
the ``cron.*`` RPC, ``/cron`` and the ``cronjob`` tool (docs/cron.md)."""
