package main

import (
	"bufio"
	"os"
	"path"
	"strconv"
	"strings"
)

// NCCLResolution is what NCCL would see for its NCCL_* variables at init in
// this process: the environment, then one conf file, then /etc/nccl.conf.
type NCCLResolution struct {
	// Settings are the resolved NCCL_* variables (NCCL_CONF_FILE left out:
	// it says where to read, it is no setting).
	Settings map[string]string `json:"settings"`
	// Home is the home directory the rule gives ("" if none):
	// getpwuid(getuid())->pw_dir up to NCCL 2.29, $HOME from 2.30.3.
	Home string `json:"home,omitempty"`
	// Files are the conf files NCCL would try, in order, and whether each
	// could be read.
	Files []ConfFile `json:"files"`
}

// ConfFile is one conf file NCCL tries.
type ConfFile struct {
	Path string `json:"path"`
	Read bool   `json:"read"`
}

// resolveNCCL applies NCCL's documented order (NVIDIA/nccl
// src/misc/param.cc initEnvFunc): the file named by NCCL_CONF_FILE when it
// is set and not empty, else <home>/.nccl.conf; then /etc/nccl.conf. Up to
// NCCL 2.29 home comes from the password database for the process's uid
// (userHomeDir: getpwuid(getuid())->pw_dir, not $HOME); from 2.30.3 it is
// getenv("HOME") (commit b3aeda4a): envHome selects that rule. Each line is
// set with setenv(name, value, 0) (setEnvFile; ncclOsSetEnv in
// src/os/linux.cc), so what is already set stays. Lines are read as
// setEnvFile reads them: '#' in the first column skips the line, the name
// is what precedes the first '=' and the value the rest, each at most 1023
// characters.
func resolveNCCL(environ []string, uid int, passwd, etcConf string, envHome bool) NCCLResolution {
	env := map[string]string{}
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if _, seen := env[k]; ok && !seen {
			env[k] = v
		}
	}
	res := NCCLResolution{Settings: map[string]string{}, Files: []ConfFile{}}
	var files []string
	if f := env["NCCL_CONF_FILE"]; f != "" {
		files = append(files, f)
	} else {
		if envHome {
			res.Home = env["HOME"]
		} else {
			res.Home = homeOf(passwd, uid)
		}
		if res.Home != "" {
			files = append(files, path.Join(res.Home, ".nccl.conf"))
		}
	}
	files = append(files, etcConf)
	for _, f := range files {
		read := applyConf(f, env)
		res.Files = append(res.Files, ConfFile{Path: f, Read: read})
	}
	for k, v := range env {
		if strings.HasPrefix(k, "NCCL_") && k != "NCCL_CONF_FILE" {
			res.Settings[k] = v
		}
	}
	return res
}

// applyConf sets the file's variables that env does not have yet.
func applyConf(file string, env map[string]string) bool {
	f, err := os.Open(file)
	if err != nil {
		return false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 64*1024), 1<<20)
	for s.Scan() {
		line := s.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		name, value, ok := strings.Cut(line, "=")
		if !ok || name == "" {
			continue
		}
		name, value = cut1023(name), cut1023(value)
		if _, set := env[name]; !set {
			env[name] = value
		}
	}
	return true
}

func cut1023(s string) string {
	if len(s) > 1023 {
		return s[:1023]
	}
	return s
}

// homeOf returns the home directory of uid in a passwd file
// (name:password:uid:gid:gecos:home:shell), "" when it has no entry.
func homeOf(passwd string, uid int) string {
	e, _ := passwdEntry(passwd, uid)
	return e[5]
}

// passwdEntry returns the fields of uid's first entry in a passwd file.
func passwdEntry(passwd string, uid int) ([7]string, bool) {
	var out [7]string
	f, err := os.Open(passwd)
	if err != nil {
		return out, false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Split(s.Text(), ":")
		if len(fields) < 7 {
			continue
		}
		if id, err := strconv.Atoi(fields[2]); err == nil && id == uid {
			copy(out[:], fields)
			return out, true
		}
	}
	return out, false
}
