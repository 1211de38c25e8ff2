package core

import (
	"fmt"
	"os"
	"os/user"
)

// OSActor names the person or process behind an action in the audit
// trail: kind, a colon, the OS user (from the user database, else $USER,
// else the uid) and the host: "cli:alice@ops1" for ffctl's commands,
// "client:USER@HOST" for a program's client.
func OSActor(kind string) string {
	name := ""
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	if name == "" {
		name = os.Getenv("USER")
	}
	if name == "" {
		name = fmt.Sprintf("uid:%d", os.Getuid())
	}
	host, _ := os.Hostname()
	return kind + ":" + name + "@" + host
}
