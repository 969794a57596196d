package gateway

// OnStreamSubscribed makes every event stream of g call fn once it is
// subscribed and before it reads history. Call it before g runs.
func OnStreamSubscribed(g *Gateway, fn func()) { g.streamSubscribed = fn }
