package testenv

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
	tcredis "github.com/testcontainers/testcontainers-go/modules/redis"
)

// Images of the containers the harness starts when a Docker engine answers.
const (
	redisImage    = "redis:7-alpine"
	postgresImage = "postgres:16-alpine"
)

var docker struct {
	once sync.Once
	ok   bool
}

// dockerAvailable reports, once per test binary, whether a Docker engine
// answers. It first dials the places an engine listens on (DOCKER_HOST,
// ~/.testcontainers.properties, the usual sockets) with a short timeout, so
// that a machine without Docker costs a few stat calls, and only then asks
// testcontainers, bounded in time too. RATESYNC_TEST_DOCKER=0 turns Docker
// off.
func dockerAvailable(logf func(string, ...any)) bool {
	docker.once.Do(func() {
		if os.Getenv(envDocker) == "0" {
			return
		}
		if !dockerListening() {
			return
		}
		err := dockerHealthy(10 * time.Second)
		if err != nil {
			logf("testenv: a Docker socket answers but testcontainers cannot use it: %v", err)
			return
		}
		docker.ok = true
	})
	return docker.ok
}

// dockerListening reports whether anything accepts connections where a
// Docker engine would.
func dockerListening() bool {
	var hosts []string
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		hosts = append(hosts, h)
	}
	home, _ := os.UserHomeDir()
	if home != "" {
		hosts = append(hosts, propertiesHosts(filepath.Join(home, ".testcontainers.properties"))...)
	}
	hosts = append(hosts, "unix:///var/run/docker.sock")
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		hosts = append(hosts, "unix://"+filepath.Join(d, "docker.sock"))
	}
	hosts = append(hosts, fmt.Sprintf("unix:///run/user/%d/docker.sock", os.Getuid()))
	if home != "" {
		hosts = append(hosts,
			"unix://"+filepath.Join(home, ".docker/run/docker.sock"),
			"unix://"+filepath.Join(home, ".docker/desktop/docker.sock"),
			"unix://"+filepath.Join(home, ".colima/default/docker.sock"),
			"unix://"+filepath.Join(home, ".rd/docker.sock"),
		)
	}
	for _, h := range hosts {
		u, err := url.Parse(h)
		if err != nil {
			continue
		}
		var network, addr string
		switch u.Scheme {
		case "unix":
			network, addr = "unix", u.Path
			if _, err := os.Stat(addr); err != nil {
				continue
			}
		case "tcp", "http", "https":
			network, addr = "tcp", u.Host
		default:
			continue // ssh, npipe: not for this harness
		}
		c, err := net.DialTimeout(network, addr, time.Second)
		if err == nil {
			_ = c.Close()
			return true
		}
	}
	return false
}

// propertiesHosts returns tc.host and docker.host from a
// .testcontainers.properties file.
func propertiesHosts(path string) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var hosts []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		k, v, ok := strings.Cut(s.Text(), "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if ok && (k == "tc.host" || k == "docker.host") && v != "" {
			hosts = append(hosts, v)
		}
	}
	return hosts
}

// dockerHealthy asks testcontainers whether its provider works, giving up
// after d (testcontainers resolves the Docker host without a deadline).
func dockerHealthy(d time.Duration) error {
	errc := make(chan error, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				errc <- fmt.Errorf("testcontainers panicked: %v", r)
			}
		}()
		p, err := testcontainers.ProviderDocker.GetProvider()
		if err != nil {
			errc <- err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		errc <- p.Health(ctx)
	}()
	select {
	case err := <-errc:
		return err
	case <-time.After(d):
		return fmt.Errorf("no answer within %v", d)
	}
}

// containerTimeout bounds starting a container, image pull included.
const containerTimeout = 5 * time.Minute

// dockerRedis starts the shared Redis container and returns its URL. The
// container is terminated by Main, or by testcontainers' reaper when the
// test binary ends without Main.
func dockerRedis() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), containerTimeout)
	defer cancel()
	c, err := tcredis.Run(ctx, redisImage)
	if err != nil {
		_ = testcontainers.TerminateContainer(c)
		return "", fmt.Errorf("start %s: %w", redisImage, err)
	}
	u, err := c.ConnectionString(ctx)
	if err != nil {
		_ = testcontainers.TerminateContainer(c)
		return "", fmt.Errorf("address of %s: %w", redisImage, err)
	}
	atExit(func() {
		if err := testcontainers.TerminateContainer(c); err != nil {
			fmt.Fprintf(os.Stderr, "testenv: shared Redis container: %v\n", err)
		}
	})
	return u + "/0", nil
}

// dockerPostgres starts the shared PostgreSQL container, tuned like the
// local servers, and returns the URL of its postgres database.
func dockerPostgres() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), containerTimeout)
	defer cancel()
	c, err := tcpostgres.Run(ctx, postgresImage,
		tcpostgres.WithUsername("postgres"),
		tcpostgres.WithPassword("postgres"),
		tcpostgres.WithDatabase("postgres"),
		tcpostgres.BasicWaitStrategies(),
		testcontainers.WithCmd("postgres",
			"-c", "fsync=off",
			"-c", "synchronous_commit=off",
			"-c", "full_page_writes=off",
			"-c", "max_connections=300"),
	)
	if err != nil {
		_ = testcontainers.TerminateContainer(c)
		return "", fmt.Errorf("start %s: %w", postgresImage, err)
	}
	u, err := c.ConnectionString(ctx, "sslmode=disable")
	if err != nil {
		_ = testcontainers.TerminateContainer(c)
		return "", fmt.Errorf("address of %s: %w", postgresImage, err)
	}
	atExit(func() {
		if err := testcontainers.TerminateContainer(c); err != nil {
			fmt.Fprintf(os.Stderr, "testenv: shared PostgreSQL container: %v\n", err)
		}
	})
	return u, nil
}
