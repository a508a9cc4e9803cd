package main

import (
	"fmt"
	"os"

	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/store"
)

func main() {
	st, err := store.Open(store.Config{Dir: os.Args[1], Reserve: 1})
	if err != nil {
		panic(err)
	}
	defer st.Close()
	for _, key := range os.Args[2:] {
		cur, err := st.StatVersion("soak", key)
		fmt.Printf("%s current: %+v err=%v\n", key, short(cur), err)
		res, err := st.ListVersions("soak", object.VersionListOptions{Prefix: key, Max: 100, Hidden: true})
		if err != nil {
			fmt.Println(err)
			continue
		}
		for _, v := range res.Versions {
			if v.Key == key {
				fmt.Printf("   v %s cur=%v\n", short(v.Object), v.Current)
			}
		}
	}
}

func short(o *object.Object) string {
	if o == nil {
		return "nil"
	}
	return fmt.Sprintf("hlc=%d meta=%d del=%v ver=%v dm=%v purged=%v size=%d id=%v", o.HLC, o.MetaHLC, o.Deleted, o.Versioned, o.DeleteMarker, o.Purged, o.Size, o.UserMeta)
}
