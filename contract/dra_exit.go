package contract

// DRATaintAgentStopped is the key of the NoSchedule device taint the node
// agent puts on every device of its node before a planned exit (a rollout,
// an upgrade) when no other instance of the driver takes over: while no
// driver serves the node, the scheduler must not hand its devices to new
// pods. The next agent publishes the devices without it.
const DRATaintAgentStopped = DRADriverName + "/agent-stopped"
