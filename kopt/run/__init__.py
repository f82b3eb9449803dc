"""Floor 5: the machinery on Ray -- builder, runner, scheduler, device classes, cluster attach
and signals, the warm service and its launchpad records."""
