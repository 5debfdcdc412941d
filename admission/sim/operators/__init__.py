"""What runs in the simulated cluster: the job operators, a scheduler and a kubelet, the
Deployment/ReplicaSet, CronJob and serving controllers, a cluster-autoscaler and a dcgm-exporter."""
