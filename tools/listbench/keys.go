package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// The bucket is a tree: dirNNN/subNN/fileNNNNNN. Object i goes to sub i%100 of dir
// (i/100)%1000, so the first 100 objects fill dir000/sub00..sub99, every dir that holds at
// least 100 objects has exactly 100 subs, and from 100,000 objects on there are exactly 1000
// top-level dirs (with 1,000,000 objects: 1000 per dir, 10 per sub). The file number is i
// itself, so keys are unique; insertion order (i) is far from key order, as in real use.
const (
	subsPerDir = 100
	topDirs    = 1000
	bucketName = "list"
	// delimPrefix is the prefix of the delimiter listing: it has min(N, 100) common prefixes.
	delimPrefix = "dir000/"
)

func keyOf(i int) string {
	return fmt.Sprintf("dir%03d/sub%02d/file%06d", (i/subsPerDir)%topDirs, i%subsPerDir, i)
}

// fileNum is the object number i of keyOf(i), or -1.
func fileNum(key string) int {
	i := strings.LastIndex(key, "/file")
	if i < 0 {
		return -1
	}
	n, err := strconv.Atoi(key[i+len("/file"):])
	if err != nil {
		return -1
	}
	return n
}

// bodySize is the body length of object i: 0..100 bytes, spread evenly.
func bodySize(i int) int {
	if i < 0 {
		return -1
	}
	return (i * 37) % 101
}

// sortedKeys returns every key of an n-object bucket in listing (byte) order.
func sortedKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = keyOf(i)
	}
	slices.Sort(keys)
	return keys
}

// expectedDelimCount is the number of common prefixes under delimPrefix with delimiter "/".
func expectedDelimCount(n int) int { return min(n, subsPerDir) }

// expectedTopDirs is the number of top-level common prefixes with delimiter "/".
func expectedTopDirs(n int) int { return min((n+subsPerDir-1)/subsPerDir, topDirs) }
