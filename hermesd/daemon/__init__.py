"""The hermesd process: command line and lifecycle (`main`), which services run and how they are
connected (`services`), configuration (`config`, `config_edit`), logging (`logs`) and systemd
notification (`sdnotify`). Nothing below this package imports it."""
