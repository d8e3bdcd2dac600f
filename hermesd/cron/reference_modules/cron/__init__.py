"""The reference's ``cron`` package name, for plugins running inside hermesd: only
``cron.jobs`` (create_job, list_jobs and friends) is provided. See docs/cron.md."""
