"""``python -m kopt``: the `kopt` command (kopt.front: a queued sweep starts in the local
service's ready driver; anything else runs kopt.cli in this process)."""

from kopt.front import entry

entry()
