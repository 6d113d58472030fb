"""The embedded demo (`make run`): its data (`manage.py load_demo`) and its training workload from the Alibaba trace
(the `scheduler.demo_workload` task). Above the apps it fills, below the console that starts it."""
