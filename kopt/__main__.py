"""``python -m kopt``: the `kopt` command (kopt.cli.front: a queued sweep starts in the local
service's ready driver; anything else runs kopt.cli.main in this process)."""

from kopt.cli.front import entry

entry()
