"""Floor 9: the `kopt` command -- its front (standard library only), the click commands,
console rendering, the launchpad's ready drivers."""
