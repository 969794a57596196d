// Package streams is the admin side of the contract's JetStream storage:
// the intended configuration of every stream and KV bucket (Configs),
// making them where they are missing or bringing them to it (Provision,
// Reconcile), and waiting until each serves reads (AwaitServing). Every
// service provisions at start, so start order does not matter; an operator
// runs the same code through skein provision.
package streams
