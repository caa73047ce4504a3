// trainguard-entry delivers trainguard's in-pod agent into a pod whose image knows nothing of trainguard.
//
// The operator's image holds an installation: ROOT/bin/trainguard-entry (this program, static, so it runs in
// any image) and ROOT/lib (the agent's pure-Python modules, standard library only). The operator gives each
// pod the installation at /trainguard: the operator's image mounted there read-only (an image volume), or an
// emptyDir that one init container, in the operator's image, fills ("install"). The container's command then runs through "run", which looks for a
// python3 in the image (the probe) and starts the agent with it, or, where the image has none, says so (on
// stderr, in the container's termination message and to the operator's report endpoint) and runs the command
// as written.
//
//	trainguard-entry install DEST             copy this installation (bin/, lib/) into DEST
//	trainguard-entry probe                    find python3 >= 3.8 in this image; record it (probe.json, in ROOT
//	                                          where it can be written, else in TMPDIR/trainguard; and
//	                                          the container's termination message); exit 0 either way
//	trainguard-entry run [AGENT OPTIONS] -- CMD...
//	                                          run CMD under the agent, or as written where there is no python3
//	trainguard-entry python ARGS...           the image's python with the agent's modules on its path
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The oldest Python the agent's modules run on.
const minMajor, minMinor = 3, 8

// Probe is what "probe" found, as the operator reads it from the init container's termination message.
type Probe struct {
	// Python is the interpreter's path in the image ("" when none was usable).
	Python string `json:"python"`
	// Version is its version, "3.11.2" ("" when none answered).
	Version string `json:"version"`
	// Usable says whether the agent can run with it.
	Usable bool `json:"usable"`
	// Reason says why not, for people: what is missing and what it costs.
	Reason string `json:"reason,omitempty"`
}

const usage = `usage:
  trainguard-entry install DEST
  trainguard-entry probe
  trainguard-entry run [AGENT OPTIONS] -- CMD...
  trainguard-entry python ARGS...`

func main() {
	os.Exit(dispatch(os.Args[1:]))
}

func dispatch(args []string) int {
	if len(args) == 0 {
		return fail(2, "no command\n%s", usage)
	}
	root, err := installation()
	if err != nil {
		return fail(1, "cannot find this installation: %v", err)
	}
	switch args[0] {
	case "install":
		if len(args) != 2 {
			return fail(2, "install takes one argument, the directory to copy into\n%s", usage)
		}
		return install(root, args[1])
	case "probe":
		if len(args) != 1 {
			return fail(2, "probe takes no arguments\n%s", usage)
		}
		return probeCommand(root)
	case "run":
		return run(root, args[1:])
	case "python":
		return python(root, args[1:])
	case "-h", "--help", "help":
		fmt.Println(usage)
		return 0
	default:
		return fail(2, "unknown command %q\n%s", args[0], usage)
	}
}

func fail(code int, format string, args ...any) int {
	fmt.Fprintf(os.Stderr, "trainguard-entry: "+format+"\n", args...)
	return code
}

// installation is ROOT: the directory above the one this program lies in.
func installation() (string, error) {
	if root := os.Getenv("TRAINGUARD_ENTRY_ROOT"); root != "" {
		return root, nil
	}
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	self, err = filepath.EvalSymlinks(self)
	if err != nil {
		return "", err
	}
	return filepath.Dir(filepath.Dir(self)), nil
}

// install copies ROOT's bin/ and lib/ into dest, keeping modes.
func install(root, dest string) int {
	count := 0
	for _, part := range []string{"bin", "lib"} {
		source := filepath.Join(root, part)
		err := filepath.WalkDir(source, func(path string, entry fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			relative, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			target := filepath.Join(dest, relative)
			info, err := entry.Info()
			if err != nil {
				return err
			}
			if entry.IsDir() {
				return os.MkdirAll(target, 0o755)
			}
			if !info.Mode().IsRegular() {
				return nil
			}
			count++
			return copyFile(path, target, info.Mode().Perm())
		})
		if err != nil {
			return fail(1, "cannot copy %s into %s: %v", source, dest, err)
		}
	}
	fmt.Printf("trainguard-entry: installed %d files into %s\n", count, dest)
	return 0
}

func copyFile(source, target string, mode fs.FileMode) error {
	in, err := os.Open(source)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// stateDir is where this program keeps what it found of the image: ROOT where it can be written (an emptyDir
// the init container filled), else a directory of its own in the container's temporary directory (ROOT is an
// image volume, read-only), else "" (nothing is kept: each start probes again).
func stateDir(root string) string {
	if syscall.Access(root, 2 /* W_OK */) == nil {
		return root
	}
	dir := filepath.Join(os.TempDir(), "trainguard")
	if os.MkdirAll(dir, 0o755) == nil && syscall.Access(dir, 2) == nil {
		return dir
	}
	return ""
}

func probeFile(state string) string { return filepath.Join(state, "probe.json") }

// A directory put last on PATH holding "python", for images that have only python3.
func pythonDir(state string) string { return filepath.Join(state, "python") }

func probeCommand(root string) int {
	found := probe()
	data, _ := json.Marshal(found)
	state := stateDir(root)
	if state == "" {
		return fail(1, "cannot record the probe: neither %s nor %s can be written", root, os.TempDir())
	}
	if err := os.WriteFile(probeFile(state), data, 0o644); err != nil {
		return fail(1, "cannot record the probe: %v", err)
	}
	linkPython(state, found)
	tellMessage(data)
	fmt.Println(string(data))
	return 0
}

// linkPython gives an image that has only python3 a "python" (pythonDir of the state directory).
func linkPython(state string, found Probe) {
	if !found.Usable {
		return
	}
	if _, err := exec.LookPath("python"); err != nil {
		_ = os.MkdirAll(pythonDir(state), 0o755)
		_ = os.Symlink(found.Python, filepath.Join(pythonDir(state), "python"))
	}
}

// tellMessage writes data as the container's termination message, where the operator reads it.
func tellMessage(data []byte) {
	message := os.Getenv("TRAINGUARD_MESSAGE_FILE")
	if message == "" {
		message = "/dev/termination-log"
	}
	_ = os.WriteFile(message, data, 0o644)
}

// probe looks for python3, then python, on PATH, and asks it its version.
func probe() Probe {
	var answered *Probe
	for _, name := range []string{"python3", "python"} {
		path, err := exec.LookPath(name)
		if err != nil {
			continue
		}
		version, err := versionOf(path)
		if err != nil {
			continue
		}
		if atLeast(version, minMajor, minMinor) {
			return Probe{Python: path, Version: version, Usable: true}
		}
		if answered == nil {
			answered = &Probe{Version: version, Reason: fmt.Sprintf(
				"%s is Python %s; trainguard's agent needs %d.%d or later", path, version, minMajor, minMinor)}
		}
	}
	if answered != nil {
		return *answered
	}
	return Probe{Reason: fmt.Sprintf(
		"the image has no python3 (PATH=%s); trainguard's agent needs Python %d.%d or later",
		os.Getenv("PATH"), minMajor, minMinor)}
}

func versionOf(python string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, python, "-c",
		"import sys; print('%d.%d.%d' % tuple(sys.version_info[:3]))").Output()
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(out)), nil
}

func atLeast(version string, major, minor int) bool {
	parts := strings.SplitN(version, ".", 3)
	if len(parts) < 2 {
		return false
	}
	have, err1 := strconv.Atoi(parts[0])
	haveMinor, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return false
	}
	return have > major || (have == major && haveMinor >= minor)
}

// recorded is the probe recorded in the state directory, or a probe now, recorded there where there is one
// (the first run in a pod probes; the agent's restarts of the command in place do not start this program
// again).
func recorded(state string) Probe {
	if state != "" {
		if data, err := os.ReadFile(probeFile(state)); err == nil {
			var found Probe
			if json.Unmarshal(data, &found) == nil {
				return found
			}
		}
	}
	found := probe()
	if data, err := json.Marshal(found); err == nil && state != "" && os.WriteFile(probeFile(state), data, 0o644) == nil {
		linkPython(state, found)
	}
	return found
}

// environment is this process's, with the agent's modules (ROOT/lib) on PYTHONPATH and, last on PATH, a
// "python" where the image has only python3.
func environment(root, state string) []string {
	env := []string{}
	path, pythonPath := os.Getenv("PATH"), os.Getenv("PYTHONPATH")
	for _, item := range os.Environ() {
		if !strings.HasPrefix(item, "PATH=") && !strings.HasPrefix(item, "PYTHONPATH=") {
			env = append(env, item)
		}
	}
	lib := filepath.Join(root, "lib")
	if pythonPath != "" {
		lib += string(os.PathListSeparator) + pythonPath
	}
	if state != "" {
		if info, err := os.Stat(pythonDir(state)); err == nil && info.IsDir() {
			if path != "" {
				path += string(os.PathListSeparator)
			}
			path += pythonDir(state)
		}
	}
	if path != "" {
		env = append(env, "PATH="+path)
	}
	return append(env, "PYTHONPATH="+lib)
}

func run(root string, args []string) int {
	split := -1
	for i, arg := range args {
		if arg == "--" {
			split = i
			break
		}
	}
	if split < 0 || split == len(args)-1 {
		return fail(2, "run needs -- and a command after it\n%s", usage)
	}
	options, command := args[:split], args[split+1:]
	state := stateDir(root)
	found := recorded(state)
	if !found.Usable {
		fmt.Fprintf(os.Stderr, "trainguard-entry: %s: running the command as written, without trainguard's agent "+
			"(no hang detection, no restart in place)\n", found.Reason)
		data, _ := json.Marshal(found)
		tellMessage(data)
		tellOperator(options, found.Reason)
		return execute(command, os.Environ())
	}
	argv := append([]string{found.Python, "-m", "trainguard.agent"}, options...)
	argv = append(argv, "--")
	argv = append(argv, command...)
	return execute(argv, environment(root, state))
}

func python(root string, args []string) int {
	state := stateDir(root)
	found := recorded(state)
	if !found.Usable {
		return fail(127, "%s", found.Reason)
	}
	return execute(append([]string{found.Python}, args...), environment(root, state))
}

// execute replaces this process with argv, as a shell's exec does: 127 when it is not found, 126 when it
// cannot be run.
func execute(argv []string, env []string) int {
	program := argv[0]
	if !strings.Contains(program, "/") {
		found, err := lookPath(program, env)
		if err != nil {
			return fail(127, "%s: not found on PATH", program)
		}
		program = found
	}
	err := syscall.Exec(program, argv, env)
	if errors.Is(err, syscall.ENOENT) {
		return fail(127, "%s: no such file", program)
	}
	return fail(126, "cannot run %s: %v", program, err)
}

// lookPath finds name on the PATH of env (which may differ from this process's).
func lookPath(name string, env []string) (string, error) {
	path := ""
	for _, item := range env {
		if strings.HasPrefix(item, "PATH=") {
			path = strings.TrimPrefix(item, "PATH=")
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		candidate := filepath.Join(dir, name)
		if info, err := os.Stat(candidate); err == nil && !info.IsDir() && info.Mode()&0o111 != 0 {
			return candidate, nil
		}
	}
	return "", exec.ErrNotFound
}

// optionValue is the value of the agent's option name ("--name VALUE" or "--name=VALUE"), "" when absent.
func optionValue(options []string, name string) string {
	for i, option := range options {
		if option == name && i+1 < len(options) {
			return options[i+1]
		}
		if strings.HasPrefix(option, name+"=") {
			return strings.TrimPrefix(option, name+"=")
		}
	}
	return ""
}

// How long the operator is given to take the word that the agent is missing: the command waits for it.
const tellTries, tellTimeout, tellPause = 2, 2 * time.Second, time.Second

// tellOperator POSTs, as the agent would, a summary saying why the agent cannot run in this pod to the
// operator's report endpoint (the agent's --report-url, with the token in its --report-token file), so that
// the operator warns while the command runs; nothing where the options name no endpoint.
func tellOperator(options []string, reason string) {
	url, tokenFile := optionValue(options, "--report-url"), optionValue(options, "--report-token")
	if url == "" || tokenFile == "" {
		return
	}
	body, _ := json.Marshal(map[string]any{"report": map[string]any{"agentMissing": reason}})
	client := &http.Client{Timeout: tellTimeout}
	var last error
	for try := 0; try < tellTries; try++ {
		if try > 0 {
			time.Sleep(tellPause)
		}
		token, err := os.ReadFile(tokenFile)
		if err != nil {
			last = err
			continue
		}
		request, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			last = err
			break
		}
		request.Header.Set("Content-Type", "application/json")
		request.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
		answer, err := client.Do(request)
		if err != nil {
			last = err
			continue
		}
		_ = answer.Body.Close()
		if answer.StatusCode/100 == 2 {
			return
		}
		last = fmt.Errorf("answered %s", answer.Status)
	}
	fmt.Fprintf(os.Stderr, "trainguard-entry: cannot tell the operator at %s that the agent is missing: %v\n", url, last)
}
