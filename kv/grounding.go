package kv

// Groundings keep the grounding stage's checkpoints (Grounding), each
// under the GroundingKey of the input message that asked a candidate
// source. The Pebble backend keeps them in the processor's own store.
type Groundings interface {
	// Lock serializes this process's work on an input (string(key)): a
	// redelivery waits for the checkpoint of the delivery in hand.
	Lock(key string) (unlock func())
	// Grounding returns the checkpoint of an input.
	Grounding(key []byte) (Grounding, bool, error)
	// PutGrounding records the checkpoint of an input durably (synced):
	// on return without error a redelivery finds it.
	PutGrounding(key []byte, g Grounding) error
}
