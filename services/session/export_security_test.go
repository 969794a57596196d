package session

// ReservedKind exposes reservedKind to the security suite.
var ReservedKind = reservedKind
