"""What studies the policies offline: trace replay, the FGD placement experiment, the co-location simulation, the
autoscaling evaluation and the what-if runs the console starts. Above the domain apps (it drives their pure policies
and reads their models), below the demo and the console."""
