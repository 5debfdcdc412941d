"""What a job asks for: the pod sets of every job kind (batch Job, Kubeflow, JobSet, Ray, TrainJob,
pods, serving kinds), partial admission and which jobs are managed."""
