package eventjson

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"skein.dev/pkg/events"
)

// RecordKey is the member of Record's object that names the variant.
const RecordKey = "record"

// Record renders any variant as one JSON object on one line, for people
// reading the bus (skein decode):
//
//	{"record": "<variant name>", ...the variant's fields}
//
// Fields are named as on the wire (their msgpack names), in declaration
// order, with omitempty fields left out when empty. ACP JSON (JSON) is
// embedded as JSON, its keys, number spellings and order kept (whitespace
// is removed so that the object stays on one line); bytes that are not
// valid JSON become a JSON string. Other byte slices (an adapter's stderr)
// become a string, invalid UTF-8 as U+FFFD. A nested union is an object of
// the same form.
//
// A durable event (AcpDurableSessionUpdate, AcpDurablePermissionRequest,
// AcpDurablePermissionResponse) and a live delta
// (AcpEphemeralSessionUpdateEvent) are shown as the gateway shows them (see
// Durable): "durability", the public "type", then the native ACP
// members, flat. A stored durable event does not carry its session,
// sequence, event number or time (they are the subject, the stream and the
// headers), so those keys are absent. A history entry inside a record (a
// history page) is its public form (Durable). If the native JSON is not what
// the public form needs (not an object, no sessionUpdate), the record falls
// back to the field form.
func Record(v events.Variant) ([]byte, error) {
	rv := reflect.ValueOf(v)
	if v == nil || rv.Kind() == reflect.Pointer && rv.IsNil() {
		return nil, events.Errorf(events.CodeInternal, "record json: nil variant")
	}
	b := appendRecord(nil, v)
	// Raw JSON may hold newlines; Compact removes only insignificant
	// whitespace, and checks the whole line is one valid JSON value.
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		return nil, events.Errorf(events.CodeInternal, "record json: %s: %v", v.VariantName(), err)
	}
	return out.Bytes(), nil
}

// appendRecord appends {"record":name,...} for v.
func appendRecord(b []byte, v events.Variant) []byte {
	b = append(b, `{"`+RecordKey+`":`...)
	b = appendJSONString(b, v.VariantName())
	if pub, ok := appendPublicEvent(b, v); ok {
		return append(pub, '}')
	}
	rv := reflect.Indirect(reflect.ValueOf(v))
	if rv.Kind() != reflect.Struct {
		b = append(b, `,"value":`...)
		return append(appendValue(b, rv), '}')
	}
	return append(appendFields(b, rv, true), '}')
}

// Keys the public form of a record writes before the native members; a
// native member of the same name is dropped, as in Durable.
var (
	recordUpdateKeys    = []string{RecordKey, "durability", "type"}
	recordEphemeralKeys = []string{RecordKey, "sessionId", "afterSequence", "durability", "type"}
	recordRequestKeys   = []string{RecordKey, "durability", "type", "requestId"}
	recordResponseKeys  = []string{RecordKey, "durability", "type", "requestId", "status", "reason"}
)

// appendPublicEvent appends the members after "record" of a durable event
// or a live delta in public form, or returns false if v is neither or its
// native JSON does not fit the public form.
func appendPublicEvent(b []byte, v events.Variant) ([]byte, bool) {
	start := len(b)
	var (
		native   events.JSON
		reserved []string
		isUpdate bool
	)
	switch e := v.(type) {
	case *events.AcpDurableSessionUpdate:
		b = append(b, `,"durability":"`+DurabilityDurable+`","type":`...)
		native, reserved, isUpdate = e.Update, recordUpdateKeys, true
	case *events.AcpEphemeralSessionUpdateEvent:
		b = append(b, `,"sessionId":`...)
		b = appendJSONString(b, e.SessionID)
		b = append(b, `,"afterSequence":`...)
		b = strconv.AppendUint(b, e.AfterSequence, 10)
		b = append(b, `,"durability":"`+DurabilityEphemeral+`","type":`...)
		native, reserved, isUpdate = e.Update, recordEphemeralKeys, true
	case *events.AcpDurablePermissionRequest:
		b = append(b, `,"durability":"`+DurabilityDurable+`","type":"`+TypePermissionRequest+`","requestId":`...)
		b = appendJSONString(b, e.RequestID)
		native, reserved = e.Request, recordRequestKeys
	case *events.AcpDurablePermissionResponse:
		b = append(b, `,"durability":"`+DurabilityDurable+`","type":"`+TypePermissionResponse+`","requestId":`...)
		b = appendJSONString(b, e.RequestID)
		b = append(b, `,"status":`...)
		b = appendJSONString(b, e.Status)
		if e.Reason != nil {
			b = append(b, `,"reason":`...)
			b = appendJSONString(b, *e.Reason)
		}
		native, reserved = e.Response, recordResponseKeys
	case *events.InputRequest:
		b = append(b, `,"durability":"`+DurabilityDurable+`","type":"`+TypeInputRequest+`","requestId":`...)
		b = appendJSONString(b, e.RequestID)
		native, reserved = e.Request, recordRequestKeys
	case *events.InputResponse:
		b = append(b, `,"durability":"`+DurabilityDurable+`","type":"`+TypeInputResponse+`"`...)
		b = appendResolution(b, e.RequestID, e.Status, e.Reason)
		native, reserved = e.Response, recordResponseKeys
	default:
		return b, false
	}
	typeAt := len(b)
	out, typ, err := appendMembers(b, native, reserved, isUpdate)
	if err != nil {
		// appendMembers returns nil on error; b still holds the record key.
		return b[:start], false
	}
	if isUpdate {
		if checkType(typ) != nil {
			return out[:start], false
		}
		out = slices.Insert(out, typeAt, typ...)
	}
	return out, true
}

var (
	typeBytes        = reflect.TypeFor[[]byte]()
	typeVariant      = reflect.TypeFor[events.Variant]()
	typeHistoryEntry = reflect.TypeFor[events.AcpDurableHistoryEntry]()
)

// unionMember is implemented by every events.Union[U].
type unionMember interface{ Variant() events.Variant }

// appendFields appends ,"name":value for every field of struct rv.
// The first field is preceded by a comma only if comma is set.
func appendFields(b []byte, rv reflect.Value, comma bool) []byte {
	t := rv.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("msgpack"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fv := rv.Field(i)
		if strings.Contains(opts, "omitempty") && isEmpty(fv) {
			continue
		}
		if comma {
			b = append(b, ',')
		}
		comma = true
		b = appendJSONString(b, name)
		b = append(b, ':')
		b = appendValue(b, fv)
	}
	return b
}

func isEmpty(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Slice, reflect.Map, reflect.String, reflect.Array:
		return v.Len() == 0
	}
	return v.IsZero()
}

// appendValue appends v as JSON. The values come from decoding msgpack,
// whose nesting Unmarshal bounds, so the recursion is bounded too.
func appendValue(b []byte, v reflect.Value) []byte {
	if !v.IsValid() {
		return append(b, "null"...)
	}
	if v.CanInterface() {
		switch x := v.Interface().(type) {
		case unionMember:
			return appendVariant(b, x.Variant())
		case events.JSON:
			if len(x) == 0 {
				return append(b, "null"...)
			}
			if json.Valid(x) {
				return append(b, x...)
			}
			return appendJSONString(b, string(x))
		}
		if v.Type() == typeHistoryEntry {
			e := v.Interface().(events.AcpDurableHistoryEntry)
			if pub, err := Durable(&e); err == nil {
				return append(b, pub...)
			}
		}
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return append(b, "null"...)
		}
		if v.Type().Implements(typeVariant) && v.Kind() == reflect.Interface {
			return appendVariant(b, v.Interface().(events.Variant))
		}
		return appendValue(b, v.Elem())
	case reflect.Struct:
		b = append(b, '{')
		return append(appendFields(b, v, false), '}')
	case reflect.String:
		return appendJSONString(b, v.String())
	case reflect.Bool:
		return strconv.AppendBool(b, v.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.AppendInt(b, v.Int(), 10)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return strconv.AppendUint(b, v.Uint(), 10)
	case reflect.Float32, reflect.Float64:
		f := v.Float()
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return appendJSONString(b, strconv.FormatFloat(f, 'g', -1, 64))
		}
		return strconv.AppendFloat(b, f, 'g', -1, v.Type().Bits())
	case reflect.Slice:
		if v.IsNil() {
			return append(b, "null"...)
		}
		if v.Type().ConvertibleTo(typeBytes) {
			return appendJSONString(b, string(v.Bytes()))
		}
		fallthrough
	case reflect.Array:
		b = append(b, '[')
		for i := range v.Len() {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendValue(b, v.Index(i))
		}
		return append(b, ']')
	case reflect.Map:
		if v.IsNil() {
			return append(b, "null"...)
		}
		keys := v.MapKeys()
		names := make([]string, len(keys))
		for i, k := range keys {
			names[i] = fmt.Sprint(k.Interface())
		}
		order := make([]int, len(keys))
		for i := range order {
			order[i] = i
		}
		slices.SortFunc(order, func(i, j int) int { return strings.Compare(names[i], names[j]) })
		b = append(b, '{')
		for n, i := range order {
			if n > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, names[i])
			b = append(b, ':')
			b = appendValue(b, v.MapIndex(keys[i]))
		}
		return append(b, '}')
	}
	// Channels, funcs and the like never come out of msgpack.
	return appendJSONString(b, v.Kind().String())
}

// appendVariant appends a nested union member as a record object.
func appendVariant(b []byte, v events.Variant) []byte {
	if rv := reflect.ValueOf(v); v == nil || rv.Kind() == reflect.Pointer && rv.IsNil() {
		return append(b, "null"...)
	}
	if rv := reflect.ValueOf(v); rv.Kind() != reflect.Pointer {
		// Members may be held by value; the public form looks at pointers.
		p := reflect.New(rv.Type())
		p.Elem().Set(rv)
		v = p.Interface().(events.Variant)
	}
	return appendRecord(b, v)
}
