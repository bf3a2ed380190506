"""The durable run on DBOS: the engine, the runner, executors, approvals, the run store, workflow specs."""
