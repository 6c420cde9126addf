package schema

// Target is what an intent acts on: the provider's capability and
// operation in an environment, on a referent (the grounded candidate).
// The structs that name an intent's target embed it, so that their
// encodings keep these members flat, in this order.
type Target struct {
	Provider    string `json:"provider"`
	Capability  string `json:"capability"`
	Operation   string `json:"operation"`
	Environment string `json:"environment"`
	Referent    string `json:"referent"`
}
