package tokenizer

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// ParseIDs reads token ids as a person writes them: "1,2,3", "1 2 3" or a
// JSON array "[1,2,3]"; an empty list is allowed.
func ParseIDs(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "[") {
		var ids []int
		if err := json.Unmarshal([]byte(s), &ids); err != nil {
			return nil, fmt.Errorf("not a JSON array of integers: %v", err)
		}
		return ids, nil
	}
	fields := strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' })
	ids := make([]int, 0, len(fields))
	for _, f := range fields {
		id, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("%q is not an integer token id", f)
		}
		ids = append(ids, id)
	}
	return ids, nil
}
