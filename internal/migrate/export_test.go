package migrate

// AfterStep sets the hook called after each kind of record moved.
func AfterStep(f func(step int)) { afterStep = f }
