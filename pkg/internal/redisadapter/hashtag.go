package redisadapter

import "strings"

// HashTag returns the part of key Redis Cluster hashes when key has one:
// what is between the first '{' and the first '}' after it, if not empty;
// "" otherwise. Keys that must share a slot with key put it in their own
// name between braces.
func HashTag(key string) string {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return ""
	}
	end := strings.IndexByte(key[open+1:], '}')
	if end <= 0 {
		return ""
	}
	return key[open+1 : open+1+end]
}
