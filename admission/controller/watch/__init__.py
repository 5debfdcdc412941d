"""What every replica watches and keeps in memory: the jobs of every integrated kind and the
pods the webhook holds (``jobcache``, ``podgroups``), namespaces, PriorityClasses, training
runtimes, DRA's DeviceClasses and ResourceSlices, and the marks (``changes``) that tell the
leader's next step what moved. ``cluster_watch`` builds the informers; nothing here decides."""
