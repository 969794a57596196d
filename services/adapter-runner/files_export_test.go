package adapterrunner

// Uploads returns how many uploads are in progress on the runner.
func (r *Runner) Uploads() int { return r.files.inProgress() }
