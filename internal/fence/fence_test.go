package fence

import (
	"context"
	"errors"
	"testing"
	"time"
)

type closer struct{ closed int }

func (c *closer) Close() error { c.closed++; return nil }

func TestLeaseRunsOutWithoutRenewal(t *testing.T) {
	now := time.Unix(1000, 0)
	f := New(10 * time.Second)
	f.now = func() time.Time { return now }
	f.renewed = now
	if err := f.Check(); err != nil {
		t.Fatalf("fresh lease: %v", err)
	}
	now = now.Add(11 * time.Second)
	if err := f.Check(); !errors.Is(err, ErrLost) {
		t.Fatalf("after the lease: %v, want ErrLost", err)
	}
	f.Renew(now.Add(-time.Second)) // a heartbeat sent a second ago was answered
	if err := f.Check(); err != nil {
		t.Fatalf("renewed: %v", err)
	}
	f.Renew(now.Add(-time.Hour)) // an older answer does not move it back
	if err := f.Check(); err != nil {
		t.Fatalf("renewed by an older heartbeat: %v", err)
	}
}

func TestLoseIsFinal(t *testing.T) {
	f := New(time.Hour)
	w := &closer{}
	f.SetWriter("t/0", w)
	if f.Writer("t/0") != w {
		t.Fatal("writer not kept")
	}
	f.Lose(errors.New("session lost"))
	f.Renew(time.Now())
	if err := f.Check(); !errors.Is(err, ErrLost) {
		t.Fatalf("after Lose: %v, want ErrLost", err)
	}
	if f.Writer("t/0") != nil {
		t.Error("a lost fence still hands out its writers")
	}
	f.Close()
	if w.closed != 1 {
		t.Errorf("Close closed the writer %d times, want 1", w.closed)
	}
}

func TestDropClosesRevokedWriters(t *testing.T) {
	f := New(time.Hour)
	a, b, c := &closer{}, &closer{}, &closer{}
	f.SetWriter("t/0", a)
	f.SetWriter("t/1", b)
	f.SetWriter("t/1", c) // replaced: the old one is closed
	f.Drop("t/0")
	if a.closed != 1 || b.closed != 1 || c.closed != 0 {
		t.Errorf("closed a=%d b=%d c=%d, want 1 1 0", a.closed, b.closed, c.closed)
	}
	if f.Writer("t/0") != nil || f.Writer("t/1") != c {
		t.Error("Drop forgot the wrong writers")
	}
}

func TestContext(t *testing.T) {
	if err := Check(context.Background()); err != nil {
		t.Errorf("no fence: %v", err)
	}
	f := New(time.Hour)
	ctx := With(context.Background(), f)
	if From(ctx) != f {
		t.Fatal("From does not return the fence")
	}
	f.Lose(errors.New("x"))
	if err := Check(ctx); !errors.Is(err, ErrLost) {
		t.Errorf("Check(ctx) of a lost fence: %v", err)
	}
	if got := WriterID("p.refs.a", 3); got != "p.refs.a/3" {
		t.Errorf("WriterID: %q", got)
	}
}
