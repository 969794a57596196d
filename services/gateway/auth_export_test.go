package gateway

// Route is one row of the route table, for the security suite.
type Route struct{ Method, Path string }

// Routes returns every route the gateway serves, so that a test that walks
// them cannot forget a new one.
func Routes() []Route {
	out := make([]Route, 0, len(routeTable))
	for _, r := range routeTable {
		out = append(out, Route{Method: r.method, Path: r.path})
	}
	return out
}
