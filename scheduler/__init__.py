"""Planning (pure data, :mod:`scheduler.plan`) and execution of outofcore jobs."""
